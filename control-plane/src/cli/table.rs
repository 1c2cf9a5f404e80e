//! Columns aligned like `kubectl get`: a header row, cells padded to the widest in their column,
//! three spaces between columns, no trailing spaces.

/// A table being built.
#[derive(Debug)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// Adds one row (as many cells as headers).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                let cell = |r: &Vec<String>| r.get(c).map_or(0, |s| s.chars().count());
                self.rows.iter().map(cell).max().unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[c] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 3));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `a, b`, or `-` for none.
pub fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let mut t = Table::new(&["NAME", "N"]);
        t.row(vec!["a-long-name".into(), "1".into()]);
        t.row(vec!["b".into(), "22".into()]);
        assert_eq!(
            t.render(),
            "NAME          N\na-long-name   1\nb             22\n"
        );
    }
}
