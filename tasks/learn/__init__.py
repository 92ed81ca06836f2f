"""Flow-GRPO: the trajectory's outcome reward (broadcast to every Planner turn) and the group-normalised,
clipped policy update with KL to the reference."""
