"""`specguard distill`: the draft learns the target, from problems the target answers."""
