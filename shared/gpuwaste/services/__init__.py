"""Services: the use cases (scan, price, dedupe, notify, ticket, summarize) over ports."""
