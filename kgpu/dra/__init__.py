"""Dynamic Resource Allocation: CEL device selectors and the allocator of ResourceClaims."""
