"""The thin I/O shell: everything that talks to Kafka, Redis or Prometheus lives here."""
