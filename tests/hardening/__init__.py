"""Hardening suite (issue 6): faults, bad input, hostile names, secrets, least privilege and soak."""
