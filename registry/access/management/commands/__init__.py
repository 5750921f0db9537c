"""The access app's commands: access_report (the auditors' export of what a team can use)."""
