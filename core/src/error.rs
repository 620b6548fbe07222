//! Errors as every crate prints them: [`Causes`], an error followed by its causes.

/// An error followed by its causes, as anyhow's `{:#}` prints them: "DynamoDB is
/// unavailable: dispatch failure: connection refused". A cause that only repeats the text
/// of the one before it is left out (a `redis::RedisError` of I/O prints its `io::Error`,
/// and returns it as its source too). Every crate logs and answers errors through it, so
/// that a cause is never lost between the error and the line an operator reads.
#[derive(Clone, Copy)]
pub struct Causes<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut before = self.0.to_string();
        f.write_str(&before)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            let text = e.to_string();
            if text != before {
                write!(f, ": {text}")?;
            }
            before = text;
            cause = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn each_cause_once_in_order() {
        let chain = |texts: &[&'static str]| {
            texts
                .iter()
                .rev()
                .fold(None, |inner, t| Some(Box::new(Layer(t, inner))))
                .unwrap()
        };
        let cases: [(&[&str], &str); 4] = [
            (&["alone"], "alone"),
            (&["outer", "inner"], "outer: inner"),
            (&["a", "a", "b"], "a: b"),
            (&["a", "b", "a"], "a: b: a"),
        ];
        for (texts, printed) in cases {
            assert_eq!(Causes(&*chain(texts)).to_string(), printed, "{texts:?}");
        }
    }
}
