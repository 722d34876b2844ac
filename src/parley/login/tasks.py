"""No background jobs: a sign-in is one browser round trip."""
