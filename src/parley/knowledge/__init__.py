"""Knowledge documents: uploads (file or text), background ingestion (parse, chunk, index) and search."""
