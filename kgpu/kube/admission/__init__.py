"""The admission webhook (``kgpu webhook``): what it decides on an AdmissionReview, and the
HTTPS server that answers the API server."""
