"""The scheduling framework: extension points, status, profiles, registry, the cycle."""
