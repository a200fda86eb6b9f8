"""The example shop's settings: one database, from SHOP_DATABASE_URL (postgresql://,
mysql:// or mariadb://, sqlite:///path; default a SQLite file here), and qgen's tasks
backend on it."""

import os
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only"
USE_TZ = True
INSTALLED_APPS = ["runtime.django", "shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.db'}?mode=rwc")


def database(url: str) -> dict:
    """DATABASES["default"] for a URL the runtime's workers also connect with."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parts.path)}
    db = {
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "localhost",
        "PORT": parts.port or "",
    }
    if parts.scheme.startswith("postgres"):
        options = {"options": query["options"]} if "options" in query else {}
        return {"ENGINE": "django.db.backends.postgresql", "OPTIONS": options, **db}
    import pymysql

    pymysql.install_as_MySQLdb()  # Django's MySQL backend on PyMySQL (the mysql extra)
    return {"ENGINE": "django.db.backends.mysql", "OPTIONS": {"charset": "utf8mb4"}, **db}


DATABASES = {"default": database(DATABASE_URL)}

TASKS = {
    "default": {
        "BACKEND": "runtime.django.QgenBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "SQL": BASE_DIR / "sql",
            # both Django queues go to qgen queue "tasks" (one table)
            "QUEUES": {"default": "tasks", "emails": "tasks"},
            # the worker connects with the same URL (a PostgreSQL search_path included)
            "URL": DATABASE_URL,
        },
    }
}

LOGGING = {
    "version": 1,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.tasks": {"handlers": ["stderr"], "level": "INFO"}},
}
