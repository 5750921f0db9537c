"""The REST API: authentication, base viewsets restricted by team, serializers, views, routes."""
