//! Date expressions of the command line: `YYYY-MM-DD`, `today`, `yesterday`, `today-N`,
//! evaluated in the job's time zone, and the inclusive ranges they form.

use chrono::{Datelike, Days, NaiveDate, Utc};
use chrono_tz::Tz;

/// Resolves one date expression against "now" in `tz`.
pub fn resolve(expr: &str, tz: Tz) -> Result<NaiveDate, String> {
    resolve_at(expr, Utc::now().with_timezone(&tz).date_naive())
}

/// Resolves one date expression against a given "today".
pub fn resolve_at(expr: &str, today: NaiveDate) -> Result<NaiveDate, String> {
    let d = parse_at(expr, today)?;
    if !(1..=9999).contains(&d.year()) {
        return Err(format!(
            "`{expr}` is the date {d}: a partition's date has a year of four digits (0001 to 9999), \
             as its folder name (YYYY-MM-DD) and readers take it"
        ));
    }
    Ok(d)
}

fn parse_at(expr: &str, today: NaiveDate) -> Result<NaiveDate, String> {
    let e = expr.trim();
    let err = || format!("`{expr}` is not a date: use YYYY-MM-DD, today, yesterday or today-N (e.g. today-7)");
    match e {
        "today" => return Ok(today),
        "yesterday" => return today.checked_sub_days(Days::new(1)).ok_or_else(err),
        _ => {}
    }
    if let Some(n) = e.strip_prefix("today-") {
        let n: u64 = n.parse().map_err(|_| err())?;
        return today.checked_sub_days(Days::new(n)).ok_or_else(err);
    }
    NaiveDate::parse_from_str(e, "%Y-%m-%d").map_err(|_| err())
}

/// Every date from `from` to `to`, inclusive.
/// The longest range one run takes: 100 years of days.
pub const MAX_RANGE_DAYS: i64 = 36_525;

pub fn range(from: NaiveDate, to: NaiveDate) -> Result<Vec<NaiveDate>, String> {
    if to < from {
        return Err(format!("--to {to} is before --from {from}"));
    }
    let days = (to - from).num_days() + 1;
    if days > MAX_RANGE_DAYS {
        return Err(format!(
            "--from {from} --to {to} is {days} days; a run takes at most {MAX_RANGE_DAYS} (100 years): \
             is a year mistyped? Split longer backfills into several runs"
        ));
    }
    Ok(from.iter_days().take_while(|d| *d <= to).collect())
}

/// Days since 1970-01-01 (Arrow's `date32`).
pub fn to_days(d: NaiveDate) -> i32 {
    (d - NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")).num_days() as i32
}

/// The first day a partition can have: 0001-01-01, as `date32`.
pub fn first_day() -> i32 {
    to_days(NaiveDate::from_ymd_opt(1, 1, 1).expect("a date"))
}

/// The last day a partition can have: 9999-12-31, as `date32`.
pub fn last_day() -> i32 {
    to_days(NaiveDate::from_ymd_opt(9999, 12, 31).expect("a date"))
}

/// The date of a `date32` value.
pub fn from_days(days: i32) -> Option<NaiveDate> {
    NaiveDate::from_ymd_opt(1970, 1, 1)?.checked_add_signed(chrono::Duration::days(days as i64))
}

/// The first instant (Unix seconds) at which `tz`'s clock is no longer known exactly, if any:
/// the time zone table (chrono-tz) lists daylight-saving changes up to 2099 and none after, so
/// a zone that still changes its clocks then reads every later time as standard time (New
/// York's 2100-07-02 00:30 would be 2100-07-01 23:30). Zones that no longer change their
/// clocks (UTC, Tokyo) are exact at any time.
pub fn zone_known_until(tz: Tz) -> Option<i64> {
    use chrono::{Offset, TimeZone};
    let offset = |m: u32| {
        let t = NaiveDate::from_ymd_opt(2099, m, 15).and_then(|d| d.and_hms_opt(12, 0, 0)).unwrap_or_default();
        tz.offset_from_utc_datetime(&t).fix().local_minus_utc()
    };
    let changes = (1..=12).any(|m| offset(m) != offset(1));
    changes.then(|| {
        NaiveDate::from_ymd_opt(2100, 1, 1).unwrap_or_default().and_time(Default::default()).and_utc().timestamp()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions() {
        let today = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        assert_eq!(resolve_at("today", today).unwrap(), today);
        assert_eq!(resolve_at("yesterday", today).unwrap(), NaiveDate::from_ymd_opt(2026, 2, 28).unwrap());
        assert_eq!(resolve_at("today-7", today).unwrap(), NaiveDate::from_ymd_opt(2026, 2, 22).unwrap());
        assert_eq!(resolve_at("2026-11-05", today).unwrap(), NaiveDate::from_ymd_opt(2026, 11, 5).unwrap());
        assert!(resolve_at("2026-13-01", today).unwrap_err().contains("YYYY-MM-DD"));
        assert!(resolve_at("today-x", today).is_err());
        // Only years of four digits: a folder named `+10000-01-01` or `-7967-07-25` is no
        // date to readers (nor to gc).
        for far in ["+10000-01-01", "0000-01-01", "today-3650000"] {
            assert!(resolve_at(far, today).unwrap_err().contains("0001 to 9999"), "{far}");
        }
        assert!(resolve_at("0001-01-01", today).is_ok() && resolve_at("9999-12-31", today).is_ok());
    }

    #[test]
    fn ranges_are_inclusive() {
        let a = NaiveDate::from_ymd_opt(2026, 11, 1).unwrap();
        let b = NaiveDate::from_ymd_opt(2026, 11, 7).unwrap();
        assert_eq!(range(a, b).unwrap().len(), 7);
        assert!(range(b, a).is_err());
        assert_eq!(from_days(to_days(b)), Some(b));
    }

    #[test]
    fn a_zone_that_changes_its_clocks_is_known_until_2100() {
        let end = NaiveDate::from_ymd_opt(2100, 1, 1).unwrap().and_time(Default::default()).and_utc().timestamp();
        assert_eq!(zone_known_until(chrono_tz::America::New_York), Some(end));
        assert_eq!(zone_known_until(chrono_tz::Europe::London), Some(end));
        assert_eq!(zone_known_until(chrono_tz::Asia::Tokyo), None);
        assert_eq!(zone_known_until(chrono_tz::UTC), None);
    }
}
