"""Kubernetes objects, one at a time, into the model and back: Nodes and Pods (with every GPU
request dialect), Queues and PodGroups, Devices, the device-allocation annotation, condition
lists; every malformed value a ConversionError that names the object and the field."""
