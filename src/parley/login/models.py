"""No tables: the pending sign-in lives in a signed, HttpOnly cookie of the browser that started it, and
the finished one in another (read once by the console). Kept so the package has the usual shape."""
