"""Call records: what an ended conversation leaves behind, and the monitoring built on them."""
