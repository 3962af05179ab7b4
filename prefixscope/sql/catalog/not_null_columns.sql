-- The NOT NULL columns of the current database's own tables: (table, column).
SELECT table_name, column_name
FROM duckdb_columns()
WHERE NOT internal AND database_name = current_database() AND NOT is_nullable
ORDER BY ALL
