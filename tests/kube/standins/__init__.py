"""Stand-in controllers for the workload kinds whose real controllers cannot be built here."""
