"""A stage's failure: its message is the stage line's reason."""


class StageFailed(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise StageFailed(what)
