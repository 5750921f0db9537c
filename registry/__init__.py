"""Toolroom's control plane: the Django project and the apps that own every model and rule."""
