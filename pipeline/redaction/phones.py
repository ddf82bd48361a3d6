"""Phone numbers, judged by Google's libphonenumber metadata (the ``phonenumbers`` package).

The library is imported on first use: ``pipeline.settings`` imports the redaction policies, and
a command that never redacts should not pay for the metadata.
"""

from __future__ import annotations

import functools
from types import ModuleType

__all__ = ["PhoneJudge"]


@functools.cache
def _library() -> ModuleType:
    import phonenumbers

    return phonenumbers


class PhoneJudge:
    """Whether a digit string is a phone number of ``region`` (numbers said without a country
    code) or, with a leading 00 or a country code, of any country."""

    def __init__(self, region: str = "US") -> None:
        self._region = region
        self.valid("2015550123")  # loads the region's metadata now, not on the first final

    def _parse(self, digits: str) -> object | None:
        library = _library()
        candidates = [digits]
        if digits.startswith("00"):
            candidates = ["+" + digits[2:]]
        elif len(digits) > 10:
            candidates.append("+" + digits)
        for candidate in candidates:
            try:
                number = library.parse(candidate, self._region)
            except library.NumberParseException:
                continue
            parsed: object = number
            return parsed
        return None

    def valid(self, digits: str) -> bool:
        """A number that is assigned somewhere (area code and length match the metadata)."""
        number = self._parse(digits)
        return number is not None and bool(_library().is_valid_number(number))

    def possible(self, digits: str) -> bool:
        """A number of a possible length, local-only numbers (seven digits in the US) included:
        enough when the words around say it is a phone number, since a recognizer often gets
        a digit of the area code wrong."""
        library = _library()
        number = self._parse(digits)
        if number is None:
            return False
        reason = library.is_possible_number_with_reason(number)
        return reason in (
            library.ValidationResult.IS_POSSIBLE,
            library.ValidationResult.IS_POSSIBLE_LOCAL_ONLY,
        )
