"""Measuring a judge against human labels: agreement metrics and learning curves."""
