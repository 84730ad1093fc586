"""Run configuration: config/record key constants and the validated settings."""
