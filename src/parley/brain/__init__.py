"""Brain signals: what a call tells about the business (order not found, callback wanted...)."""
