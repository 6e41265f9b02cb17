"""The three Taskloom processes: board, hub and loop subscriber. They share only ``shared``."""
