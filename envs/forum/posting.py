"""Forum pages that change state: create a thread, comment and reply, vote, and edit one's own posts.

Every form is a POST followed by a redirect (so reloads do not repost), validates its input with a clear message,
and requires login; editing someone else's post is refused with 403.
"""

from __future__ import annotations

from flask import Flask, abort, flash, g, redirect, render_template, request, url_for

from envs.forum import db
from envs.forum.web import get_db, login_required, require, safe_next

MAX_TITLE = 200
MAX_BODY = 10_000


def _thread_url(thread_id: int, forum_name: str, anchor: str | None = None) -> str:
    return url_for("thread_page", name=forum_name, thread_id=thread_id, _anchor=anchor)


def _check_text(value: str, label: str, limit: int, required: bool = True) -> str | None:
    """Error message for a bad form field, or None if it is fine."""
    if required and not value:
        return f"{label} must not be empty."
    if len(value) > limit:
        return f"{label} is too long ({len(value)} characters; at most {limit})."
    return None


def register(app: Flask) -> None:
    @app.route("/submit", methods=["GET", "POST"])
    @login_required
    def submit_thread():
        conn = get_db()
        forums = db.list_forums(conn)
        form = {"forum": request.values.get("forum", ""), "title": request.form.get("title", "").strip(),
                "body": request.form.get("body", "").strip()}
        error = None
        if request.method == "POST":
            forum = db.get_forum(conn, form["forum"])
            error = ("Choose a forum." if forum is None else
                     _check_text(form["title"], "Title", MAX_TITLE) or _check_text(form["body"], "Body", MAX_BODY,
                                                                                  required=False))
            if error is None:
                cur = conn.execute("INSERT INTO threads (forum_id, author_id, title, body, score, created_at) "
                                   "VALUES (?, ?, ?, ?, 1, ?)",
                                   [forum["id"], g.user["id"], form["title"], form["body"], db.now_stamp()])
                conn.execute("INSERT INTO votes VALUES (?, 'thread', ?, 1)", [g.user["id"], cur.lastrowid])
                conn.commit()
                flash("Your thread was created.")
                return redirect(_thread_url(cur.lastrowid, forum["name"]))
        return render_template("submit.html", forums=forums, form=form, error=error), (400 if error else 200)

    @app.route("/f/<name>/<int:thread_id>/edit", methods=["GET", "POST"])
    @login_required
    def edit_thread(name: str, thread_id: int):
        conn = get_db()
        thread = db.get_thread(conn, thread_id)
        require(thread and thread["forum_name"] == name)
        if thread["author_id"] != g.user["id"]:
            abort(403)
        form = {"title": request.form.get("title", thread["title"]).strip(),
                "body": request.form.get("body", thread["body"]).strip()}
        error = None
        if request.method == "POST":
            error = _check_text(form["title"], "Title", MAX_TITLE) or _check_text(form["body"], "Body", MAX_BODY,
                                                                                  required=False)
            if error is None:
                conn.execute("UPDATE threads SET title = ?, body = ?, edited_at = ? WHERE id = ?",
                             [form["title"], form["body"], db.now_stamp(), thread_id])
                conn.commit()
                flash("Your thread was updated.")
                return redirect(_thread_url(thread_id, name))
        return render_template("edit_thread.html", thread=thread, form=form, error=error), (400 if error else 200)

    @app.post("/f/<name>/<int:thread_id>/vote")
    @login_required
    def vote_thread(name: str, thread_id: int):
        conn = get_db()
        thread = db.get_thread(conn, thread_id)
        require(thread)
        try:
            db.cast_vote(conn, g.user["id"], "thread", thread_id, request.form.get("direction", ""))
        except ValueError as exc:
            abort(400, str(exc))
        return redirect(safe_next(request.form.get("next"), _thread_url(thread_id, thread["forum_name"])))

    @app.post("/f/<name>/<int:thread_id>/comment")
    @login_required
    def post_comment(name: str, thread_id: int):
        conn = get_db()
        thread = db.get_thread(conn, thread_id)
        require(thread)
        body = request.form.get("body", "").strip()
        error = _check_text(body, "Comment", MAX_BODY)
        if error:
            flash(error, "error")
            return redirect(_thread_url(thread_id, thread["forum_name"], "comment-form"))
        comment_id = _insert_comment(thread_id, None, body)
        flash("Your comment was posted.")
        return redirect(_thread_url(thread_id, thread["forum_name"], f"comment-{comment_id}"))

    @app.route("/comment/<int:comment_id>/reply", methods=["GET", "POST"])
    @login_required
    def reply(comment_id: int):
        parent = db.get_comment(get_db(), comment_id)
        require(parent)
        body = request.form.get("body", "").strip()
        error = None
        if request.method == "POST":
            error = _check_text(body, "Reply", MAX_BODY)
            if error is None:
                new_id = _insert_comment(parent["thread_id"], comment_id, body)
                flash("Your reply was posted.")
                return redirect(_thread_url(parent["thread_id"], parent["forum_name"], f"comment-{new_id}"))
        return render_template("reply.html", parent=parent, body=body, error=error), (400 if error else 200)

    @app.route("/comment/<int:comment_id>/edit", methods=["GET", "POST"])
    @login_required
    def edit_comment(comment_id: int):
        conn = get_db()
        comment = db.get_comment(conn, comment_id)
        require(comment)
        if comment["author_id"] != g.user["id"]:
            abort(403)
        body = request.form.get("body", comment["body"]).strip()
        error = None
        if request.method == "POST":
            error = _check_text(body, "Comment", MAX_BODY)
            if error is None:
                conn.execute("UPDATE comments SET body = ?, edited_at = ? WHERE id = ?",
                             [body, db.now_stamp(), comment_id])
                conn.commit()
                flash("Your comment was updated.")
                return redirect(_thread_url(comment["thread_id"], comment["forum_name"], f"comment-{comment_id}"))
        return render_template("edit_comment.html", comment=comment, body=body, error=error), (400 if error else 200)

    @app.post("/comment/<int:comment_id>/vote")
    @login_required
    def vote_comment(comment_id: int):
        conn = get_db()
        comment = db.get_comment(conn, comment_id)
        require(comment)
        try:
            db.cast_vote(conn, g.user["id"], "comment", comment_id, request.form.get("direction", ""))
        except ValueError as exc:
            abort(400, str(exc))
        default = _thread_url(comment["thread_id"], comment["forum_name"], f"comment-{comment_id}")
        return redirect(safe_next(request.form.get("next"), default))


def _insert_comment(thread_id: int, parent_id: int | None, body: str) -> int:
    """Store a comment by the signed-in user, who upvotes it automatically as on Reddit-like sites."""
    conn = get_db()
    cur = conn.execute("INSERT INTO comments (thread_id, parent_id, author_id, body, score, created_at) "
                       "VALUES (?, ?, ?, ?, 1, ?)", [thread_id, parent_id, g.user["id"], body, db.now_stamp()])
    conn.execute("INSERT INTO votes VALUES (?, 'comment', ?, 1)", [g.user["id"], cur.lastrowid])
    conn.commit()
    return cur.lastrowid
