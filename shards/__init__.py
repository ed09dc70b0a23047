"""The Arrow shard format: schema, manifest, checksums, writer, reader and inspection."""
