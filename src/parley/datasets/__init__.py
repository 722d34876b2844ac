"""Datasets: named collections of JSON items (test conversations for evaluating flows), with CSV/JSONL import."""
