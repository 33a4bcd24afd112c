"""PNG figures beside a report's CSV: the law's curves, the plan's trade-offs, measured acceptance."""
