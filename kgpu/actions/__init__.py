"""Steps of a scheduling session: enqueue, allocate, backfill, preempt, reclaim; and the
workspace placement decision (``workspace_placement``) the node-group scheduler serves."""
