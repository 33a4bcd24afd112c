"""What a plan decides and from what: decisions, SLOs, the acceptance rates given, measured drafts ranked."""
