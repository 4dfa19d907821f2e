"""The anchors' own objects, read into kgpu's model: one mapping module per anchor.

A cluster that runs Volcano, KAI, Koordinator, KAITO or Karpenter today switches to kgpu
without rewriting its objects: each module here is a pure function from that anchor's
object (as the API server returns it) to kgpu's model, raising
:class:`kgpu.kube.objects.fields.ConversionError` naming the object, the field, the value
and what was expected. The live informers and ``kgpu simulate manifests`` share them, so
a manifest behaves offline as it does live. docs/MIGRATING.md says, per anchor, what is
read, what differs and who owns each object.
"""
