"""The loop subscriber: turns hub frames into continue turns (SPEC §9)."""
