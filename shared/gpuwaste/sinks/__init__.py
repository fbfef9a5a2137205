"""Adapters out: terminal rendering, Slack, Jira."""
