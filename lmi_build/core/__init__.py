"""What every layer uses and that uses nothing of lmi-build above it: errors, the shared record types
and names, version and path rules, atomic file writing, hashing, table and JSON reading, redaction,
and the container-profile base each target's releases derive from."""
