"""The demo: a repair shop's organization with the order-status agent, ready to talk to."""
