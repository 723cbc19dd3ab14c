"""`gangscale run`: the controller that scales node groups for whole gangs."""
