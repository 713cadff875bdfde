"""Engine services: log service, logtail (TN and CN), meta-service, transports, object store."""
