"""Notifications about access requests: e-mail to the admins who decide them and to the person who
asked, and signed webhooks (per team or global) delivered by the workers with retries."""
