# The extension module built from bindings/python/src/lib.rs: JSON text in and out.

class Checker:
    def __init__(self) -> None: ...
    def check_json(
        self, token: str, expected: str, key_set: str, options: str
    ) -> tuple[bool, str]: ...
