"""Adapters over third-party SDKs: plain dataclasses in and out, their own errors, no models."""
