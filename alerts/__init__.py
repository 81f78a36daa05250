"""Alert delivery: pipeline, Slack and console notifiers, digest rendering."""
