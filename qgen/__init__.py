"""qgen: queue declarations (qgen.toml) rendered to reviewable SQL for four dialects."""

from qgen.declaration import Declaration, DeclarationError, load_declaration

__all__ = ["Declaration", "DeclarationError", "load_declaration"]
