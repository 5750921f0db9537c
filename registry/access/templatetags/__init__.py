"""Template tags of the admin pages that show access explanations."""
