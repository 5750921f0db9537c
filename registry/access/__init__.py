"""Access: the ordered rules that decide whether a team's agent of a role may use a tool now, the
ratchet's marks, and the explanation of every verdict (`rules.py` is the list)."""
