//! Comparing resource quantities (`1Gi`, `1073741824`, `1.5G`, `5e9`) exactly.
//!
//! k8s-openapi keeps a `Quantity` as the string the apiserver sent. Deciding whether a
//! claim would shrink needs its value, so this parses the Kubernetes quantity grammar
//! into whole units (bytes, for storage), rounding up the way Kubernetes does for
//! fractions. Integer arithmetic only: `2Gi` and `2147483648` must compare equal.

/// The value of `quantity` in whole units, rounded up; `None` if it is not a
/// well-formed, non-negative quantity or is too large to represent.
pub fn to_units(quantity: &str) -> Option<u128> {
    let s = quantity.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let (pow2, pow10) = suffix_powers(suffix)?;

    let mut mantissa: u128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa.checked_mul(10)?.checked_add(u128::from(digit - b'0'))?;
    }
    let pow10 = pow10.checked_sub(i32::try_from(fraction.len()).ok()?)?;
    let numerator = mantissa.checked_mul(2u128.checked_pow(pow2)?)?;
    if pow10 >= 0 {
        numerator.checked_mul(10u128.checked_pow(pow10.unsigned_abs())?)
    } else {
        let denominator = 10u128.checked_pow(pow10.unsigned_abs())?;
        Some(numerator.div_ceil(denominator))
    }
}

/// The (power of two, power of ten) a suffix multiplies by.
fn suffix_powers(suffix: &str) -> Option<(u32, i32)> {
    let binary = |n: u32| Some((10 * n, 0));
    let decimal = |n: i32| Some((0, n));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            decimal(exponent.parse().ok()?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u128 = 1 << 30;

    #[test]
    fn binary_decimal_and_exponent_forms() {
        assert_eq!(to_units("2Gi"), Some(2 * GI));
        assert_eq!(to_units("2147483648"), Some(2 * GI));
        assert_eq!(to_units("1536Mi"), Some(GI + GI / 2));
        assert_eq!(to_units("1.5Gi"), Some(GI + GI / 2));
        assert_eq!(to_units("1G"), Some(1_000_000_000));
        assert_eq!(to_units("5e9"), Some(5_000_000_000));
        assert_eq!(to_units("1E"), Some(1_000_000_000_000_000_000));
        assert_eq!(to_units("+3k"), Some(3000));
        assert_eq!(to_units("0"), Some(0));
    }

    #[test]
    fn fractions_round_up() {
        assert_eq!(to_units("1500m"), Some(2));
        assert_eq!(to_units("0.1"), Some(1));
        assert_eq!(to_units(".5k"), Some(500));
    }

    #[test]
    fn malformed_or_negative_is_none() {
        for bad in
            ["", "Gi", "-1Gi", "1GB", "1.2.3", "1e", "1e+", "abc", "1Xi", "99999999999999999999999999999999999999Ei"]
        {
            assert_eq!(to_units(bad), None, "{bad:?}");
        }
    }
}
