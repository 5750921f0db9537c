"""Template tags of the admin's pages."""
