"""Notebook 28: torch's own tools for a job that hangs or fails: the Flight Recorder's dumps
read by rank, torch's analyzer run on them, and their figures."""
