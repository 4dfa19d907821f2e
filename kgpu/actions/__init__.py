"""Steps of a scheduling session: enqueue, allocate, backfill, preempt, reclaim."""
