"""Pure byte encodings of OpenTSDB's storage format."""
