"""Calls to the Kubernetes API server. By what it does:

- calls: ``client`` (KubeClient: objects, Bindings, calls waited for or not), carried by
  libcurl (``curl_calls`` for a caller that waits, ``curl_pump``: one thread carrying many
  at once), JSON by ``json_codec``; ``errors`` (the error tree), ``backoff``,
  ``in_flight`` (work started a few at a time: binds, events), ``printable`` (object texts
  in messages);
- what the server holds: ``resource_types`` (paths and kinds), ``watch_stream`` and
  ``informer`` (cached lists kept by watches), ``listed`` (lists kept a few seconds, for
  the webhook);
- around the scheduler: ``leader_election`` (a Lease), ``event_recorder`` (core/v1
  Events), ``http_serving`` (the HTTP servers kgpu runs).
"""
