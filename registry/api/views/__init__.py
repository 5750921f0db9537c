"""The API's views: the agents' catalogue, the official-registry list, and the team pages."""
