"""Plugins, one module each, named for what they decide, grouped by the scheduler they serve:
``node`` (a pod's filters, scores and GPU choice), ``group`` (a workspace's node-group
filters and scores), ``session`` (queue, job and victim callbacks of a session). ``names``
holds every plugin name; ``registry`` turns profiles into schedulers."""
