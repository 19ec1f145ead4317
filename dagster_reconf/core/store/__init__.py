"""A stream's files: where they live (local folders or storage URLs), atomic writes, the metrics store,
facts about the checkpoint and the file sink's log, and the record of a local cluster."""
