"""Queue-script runner, Python-function workers and cron schedules. Not built yet."""
