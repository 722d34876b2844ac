"""Reports over call records: per-day summaries as JSON or CSV."""
