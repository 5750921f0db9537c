"""Django's PostgreSQL backend with the database outage circuit (`base.py`)."""
