"""Template filters of the portal's pages."""
