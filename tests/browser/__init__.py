"""Browser tests: a real Chromium driven by Playwright against a live Toolroom."""
